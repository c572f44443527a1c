"""Example graphs: a counter chain, a router loop, a fan-out with a join, and map-reduce.

Each ``*_graph()`` function returns a :class:`~stargraph.graph.Graph`; the JSON files in
``stargraph/ir/examples`` are their IR, pinned to their hashes by the test suite.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from stargraph import reducers
from stargraph._typed import TypedModel
from stargraph.errors import InvalidInputError
from stargraph.graph import END, START, Graph, Send
from stargraph.runtime import RunContext

__all__ = [
    "CounterState",
    "bump",
    "chain_graph",
    "fanout_graph",
    "keep_going",
    "loop_graph",
    "mapreduce_graph",
    "scatter",
    "tally",
    "work",
]


class CounterState(TypedModel):
    """A counter, a log of visited nodes, and a running total."""

    typed_error = InvalidInputError

    counter: int = 0
    items: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0
    limit: int = 3


def bump(state: CounterState, ctx: RunContext) -> dict[str, Any]:
    """Count one, and log which node did it."""
    return {"counter": state.counter + 1, "items": [ctx.node]}


def tally(state: CounterState, ctx: RunContext) -> dict[str, Any]:
    """Add one to the total and log the node (safe for parallel branches: both reduce)."""
    return {"total": 1, "items": [ctx.node]}


def keep_going(state: CounterState) -> Literal["again", "done"]:
    """Route back to the loop until the counter reaches the limit."""
    return "again" if state.counter < state.limit else "done"


def scatter(state: CounterState) -> list[Send]:
    """Fan out one ``work`` execution per unit of the limit."""
    return [Send("work", {"counter": i}) for i in range(state.limit)]


def work(state: CounterState) -> dict[str, Any]:
    """One map task: log the counter value it was sent."""
    return {"items": [f"work-{state.counter}"], "total": state.counter}


def chain_graph(length: int = 3) -> Graph[CounterState]:
    """``n0 -> n1 -> ... -> END``, each node bumping the counter."""
    graph = Graph("chain", state=CounterState)
    for i in range(length):
        graph = graph.with_node(f"n{i}", bump)
    graph = graph.with_edge(START, "n0")
    for i in range(length - 1):
        graph = graph.with_edge(f"n{i}", f"n{i + 1}")
    return graph.with_edge(f"n{length - 1}", END)


def loop_graph() -> Graph[CounterState]:
    """A node that routes back to itself until ``counter == limit``."""
    return (
        Graph("loop", state=CounterState)
        .with_node("step", bump)
        .with_edge(START, "step")
        .with_conditional_edges("step", keep_going, {"again": "step", "done": END})
    )


def fanout_graph(branches: int = 3) -> Graph[CounterState]:
    """``start`` fans out to parallel branches that all join into ``join``."""
    names = [f"b{i}" for i in range(branches)]
    graph = Graph("fanout", state=CounterState).with_node("start", bump).with_node("join", bump)
    graph = graph.with_edge(START, "start")
    for name in names:
        graph = graph.with_node(name, tally).with_edge("start", name)
    return graph.with_edge(names, "join").with_edge("join", END)


def mapreduce_graph() -> Graph[CounterState]:
    """``plan`` scatters ``limit`` Send tasks to ``work``; their writes reduce into the state."""
    return (
        Graph("mapreduce", state=CounterState)
        .with_node("plan", bump)
        .with_node("work", work)
        .with_edge(START, "plan")
        .with_conditional_edges("plan", scatter, ["work"])
        .with_edge("work", END)
    )
