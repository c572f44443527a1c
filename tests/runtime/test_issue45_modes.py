"""Async runs and streams at invoke speed: an async step of sync nodes runs as ``invoke``
runs it; ``values`` items are cheap copies equal to validated states; ``events`` streams
keep their items, order and liveness."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.graph import END, START, Graph

TIMEOUT = 30.0  # only to catch a hang

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")


class S(BaseModel):
    n: int = 0
    seen: Annotated[list[str], reducers.append] = []


def _looks(name: str) -> Any:
    def look(state: S) -> dict[str, Any]:
        here = "loop" if _on_loop() else "elsewhere"
        return {"seen": [f"{name}:{REQUEST.get()}:{here}"]}

    return look


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def fork(state: S) -> dict[str, Any]:
    return {"n": state.n + 1}


def join(state: S) -> dict[str, Any]:
    return {"n": state.n + 1}


def _fan_out(**options: Any) -> Graph[S]:
    graph = Graph("fan", state=S).with_node("fork", fork).with_node("join", join)
    branches = ["b1", "b2", "b3"]
    for name in branches:
        graph = graph.with_node(name, _looks(name), ref=f"t.{name}", **options)
        graph = graph.with_edge("fork", name)
    return graph.with_edge(START, "fork").with_edge(branches, "join").with_edge("join", END)


@pytest.mark.parametrize("how", ["ainvoke", "astream"])
def test_issue45_async_fan_out_of_sync_nodes_runs_as_invoke_does(how: str) -> None:
    """A step of several sync nodes under ``ainvoke``/``astream(updates)`` runs in the
    work-stealing batch the loop's thread takes part in, as ``invoke`` runs it: the first
    task in task order runs on the loop's thread, in the awaiting task's context (a worker
    thread would see neither), and the writes are those of ``invoke``."""
    app = _fan_out().compile()

    async def main() -> list[str]:
        REQUEST.set("req")
        if how == "ainvoke":
            state = await app.ainvoke({})
            return list(state.seen)
        seen: list[str] = []
        async for item in app.astream({}, mode="updates"):
            for writes in item.values():
                seen += writes.get("seen", [])
        return seen

    seen = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert [s.split(":")[0] for s in seen] == ["b1", "b2", "b3"]
    assert seen[0] == "b1:req:loop"
    assert app.invoke({}).n == 2


def test_issue45_blocking_fan_out_keeps_the_event_loop_free() -> None:
    """``blocking=True`` sync nodes of an async run's step run on worker threads: the loop
    goes on meanwhile (here it sets the event the nodes wait for; were they run on the
    loop's thread, the run would hang)."""
    go = threading.Event()

    def waits(state: S) -> dict[str, Any]:
        assert go.wait(TIMEOUT), "the event loop was blocked"
        return {"seen": ["waited"]}

    graph = Graph("blocking", state=S).with_node("fork", fork).with_node("join", join)
    for name in ("w1", "w2"):
        graph = graph.with_node(name, waits, ref="t.waits", blocking=True)
        graph = graph.with_edge("fork", name)
    app = graph.with_edge(START, "fork").with_edge(["w1", "w2"], "join").with_edge("join", END)

    async def main() -> S:
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, go.set)
        return await app.compile().ainvoke({})

    state = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert state.seen == ["waited", "waited"]
