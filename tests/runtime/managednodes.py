"""Nodes for the tests of managed values and ``ctx.thread_id``: module-level, so that
resume and replay in a fresh graph find them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel

from stargraph import END, START, Graph, RunContext, reducers
from stargraph.graph import RemainingSteps
from stargraph.skills import Skill


class Budget(BaseModel):
    """A log and the steps left, as a managed value."""

    log: Annotated[list[int], reducers.append] = []
    left: Annotated[int, RemainingSteps] = 0


def note(state: Budget) -> dict[str, Any]:
    """Log the steps left this node sees."""
    return {"log": [state.left]}


def until_two(state: Budget) -> str:
    """Loop while more than two steps are left, as a loop that winds down would."""
    return END if state.log[-1] <= 2 else "note"


def until_left(state: Budget) -> str:
    """Loop while more than two steps are left, reading the managed value itself."""
    return END if state.left <= 2 else "note"


async def until_left_async(state: Budget, ctx: RunContext) -> str:
    """:func:`until_left` as an async router taking the run context, which agrees."""
    assert ctx.remaining_steps == state.left
    return END if state.left <= 2 else "note"


def budget_loop() -> Graph[Budget]:
    """``note`` looping until two steps are left."""
    return (
        Graph("budget", state=Budget)
        .with_node("note", note)
        .with_edge(START, "note")
        .with_conditional_edges("note", until_two, ["note", END])
    )


def cheat(state: Budget) -> dict[str, Any]:
    """Writes the managed value, which is refused."""
    return {"left": 99}


class Threaded(BaseModel):
    """Which threads the nodes saw, and an answer asked of a human."""

    seen: Annotated[list[str], reducers.append] = []
    answer: str = ""


def see(state: Threaded, ctx: RunContext) -> dict[str, Any]:
    """Log the run's thread."""
    return {"seen": [str(ctx.thread_id)]}


def ask(state: Threaded, ctx: RunContext) -> dict[str, Any]:
    """Log the thread, then ask (so the run is resumed before this node ends)."""
    return {"seen": [str(ctx.thread_id)], "answer": str(ctx.interrupt("ok?"))}


def threaded(asking: bool = False) -> Graph[Threaded]:
    """``see`` (then ``ask`` when ``asking``)."""
    graph = Graph("threaded", state=Threaded).with_node("see", see).with_edge(START, "see")
    if asking:
        graph = graph.with_node("ask", ask).with_edge("see", "ask").with_edge("ask", END)
    return graph


def thread_skill() -> Skill:
    """A one-node skill whose node logs its run's thread."""
    inner = Graph("inner", state=Threaded).with_node("see", see).with_edge(START, "see")
    return Skill(
        name="see-thread",
        version="1.0.0",
        kind="utility",
        description="logs the thread",
        state_schema=Threaded,
        subgraph=inner.to_ir(),
    )
