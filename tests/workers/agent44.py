"""A ReAct agent with one tool, for workers to import: its graph (a factory and a compiled
graph), a plain node that reads ``ctx.services["prices"]``, and the services a worker gives
the agent (``services``: a model on the scripted server at ``SG44_BASE_URL`` and an arbiter
with a workspace at ``SG44_WORKSPACE``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from stargraph.graph import END, START, Graph
from stargraph.llm import OpenAIChatModel
from stargraph.runtime import RunContext
from stargraph.skills.react import react_graph
from stargraph.testing import Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolRegistry, llm_name_for, tool

CALC = "workers44.calc@1.0.0"
TASK = {"task": "6*7?"}


@tool(id=CALC)
def calc(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def script() -> list[Reply]:
    """What the scripted model answers for one run of :data:`TASK`."""
    return [Reply.tool_calls([(llm_name_for(CALC), {"a": 6, "b": 7})]), Reply.text("It is 42.")]


def agent() -> Graph[Any]:
    """The agent's graph: a factory, as ``submit`` takes it."""
    return react_graph(tools=[CALC])


compiled = agent().compile()
"""The agent compiled without services: a worker gives them."""

AGENT = "tests.workers.agent44:agent"
COMPILED = "tests.workers.agent44:compiled"
PIN = agent().to_ir().graph_hash
"""The graph hash a submission pins."""


def plain_invoke(workspace: Path) -> Any:
    """The agent's final state from a plain in-memory ``invoke`` (its own scripted server)."""
    with ScriptedOpenAIServer() as server:
        server.set_script(script())
        services = make_services(server.base_url, workspace)
        try:
            return agent().compile(services=services).invoke(TASK)
        finally:
            for service in services.values():
                service.close()


def make_services(base_url: str, workspace: str | Path) -> dict[str, Any]:
    """A chat model on ``base_url`` and an arbiter holding :func:`calc`."""
    model = OpenAIChatModel("smollm2", base_url=base_url, timeout=30.0)
    arbiter = Arbiter(ToolRegistry.build(builtins=[calc]), workspace=workspace)
    return {"model": model, "arbiter": arbiter}


def services() -> dict[str, Any]:
    """The services of a worker process (``--services tests.workers.agent44:services``)."""
    return make_services(os.environ["SG44_BASE_URL"], os.environ["SG44_WORKSPACE"])


class PriceState(BaseModel):
    """What :func:`priced` reads and writes."""

    item: str = "tea"
    price: int = 0


def price(state: PriceState, ctx: RunContext) -> dict[str, int]:
    """A plain node that looks its price up in a service."""
    return {"price": ctx.services["prices"][state.item]}


def priced() -> Graph[PriceState]:
    """One plain node that needs ``services["prices"]``."""
    return (
        Graph("priced", state=PriceState)
        .with_node("price", price)
        .with_edge(START, "price")
        .with_edge("price", END)
    )


def unpriced(state: PriceState, ctx: RunContext) -> dict[str, int]:
    """A plain node whose own lookup fails (a KeyError that is no missing service)."""
    table: dict[str, int] = {}
    return {"price": table[state.item]}


def broken() -> Graph[PriceState]:
    """One plain node that raises a KeyError of its own data."""
    return (
        Graph("broken", state=PriceState)
        .with_node("unpriced", unpriced)
        .with_edge(START, "unpriced")
        .with_edge("unpriced", END)
    )
