"""One event loop per run under a sync driver; async routers under every driver."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from stargraph.graph import END, START, Graph
from stargraph.runtime import RunContext


class Count(BaseModel):
    n: int = 0
    route: str = ""


class LoopBoundClient:
    """Like an async HTTP or database client: bound to the loop it was made on."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[int] = asyncio.Queue()
        self.calls = 0

    async def call(self) -> int:
        if asyncio.get_running_loop() is not self.loop:
            raise RuntimeError("client used from another event loop than the one it was made on")
        self.calls += 1
        await self.queue.put(self.calls)
        return await self.queue.get()


CLIENTS: list[LoopBoundClient] = []
LOOPS: list[asyncio.AbstractEventLoop] = []


async def make_client(state: Count) -> dict[str, Any]:
    CLIENTS.append(LoopBoundClient())
    return {"n": await CLIENTS[-1].call()}


async def use_client(state: Count) -> dict[str, Any]:
    return {"n": await CLIENTS[-1].call()}


def test_issue18_an_async_client_made_in_step_1_works_in_step_5() -> None:
    CLIENTS.clear()
    graph = Graph("client", state=Count).with_node("s1", make_client)
    graph = graph.with_edge(START, "s1")
    previous = "s1"
    for i in range(2, 6):
        graph = graph.with_node(f"s{i}", use_client).with_edge(previous, f"s{i}")
        previous = f"s{i}"
    app = graph.with_edge(previous, END).compile()
    assert app.invoke({}).n == 5  # five calls on one client, one per step
    # The run's loop was closed when the run ended: nothing of it lingers.
    assert CLIENTS[0].loop.is_closed()
    # A second run gets a loop of its own.
    app.invoke({})
    assert CLIENTS[1].loop is not CLIENTS[0].loop


async def where(state: Count) -> dict[str, Any]:
    LOOPS.append(asyncio.get_running_loop())
    return {"n": state.n + 1}


async def async_router(state: Count) -> str:
    LOOPS.append(asyncio.get_running_loop())
    await asyncio.sleep(0)
    return "again" if state.n < 3 else "done"


async def async_router_ctx(state: Count, ctx: RunContext) -> str:
    await asyncio.sleep(0)
    return "again" if state.n < 3 else "done"


async def async_start(state: Count) -> str:
    LOOPS.append(asyncio.get_running_loop())
    return "go"


def _looping(router: Any) -> Graph[Count]:
    return (
        Graph("aroute", state=Count)
        .with_node("work", where)
        .with_conditional_edges(START, async_start, {"go": "work"})
        .with_conditional_edges("work", router, {"again": "work", "done": END})
    )


def test_issue18_async_routers_work_under_ainvoke_and_astream() -> None:
    for router in (async_router, async_router_ctx):
        app = _looping(router).compile()
        LOOPS.clear()

        async def main(app: Any) -> tuple[int, list[str], asyncio.AbstractEventLoop]:
            state = await app.ainvoke({})
            kinds = [e.kind async for e in app.astream({})]
            return state.n, kinds, asyncio.get_running_loop()

        n, kinds, loop = asyncio.run(main(app))
        assert n == 3
        assert kinds[-1] == "run_finished"
        assert kinds.count("node_finished") == 3
        # Nodes and routers ran on the caller's loop.
        assert LOOPS
        assert all(seen is loop for seen in LOOPS)


def test_issue18_async_routers_under_sync_invoke_share_the_run_loop() -> None:
    LOOPS.clear()
    app = _looping(async_router).compile()
    assert app.invoke({}).n == 3
    # start router, then per step the node and its router: all on the run's one loop
    assert len(LOOPS) == 1 + 3 * 2
    assert all(seen is LOOPS[0] for seen in LOOPS)
