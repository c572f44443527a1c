"""Closing a stream inside a step: the sync and async drivers agree.

Both let the step in flight finish and commit (its node bodies ran), then end the run
``cancelled`` at that step; ``resume`` continues with the next step and reaches the state an
uninterrupted run reaches, without running the committed step again. The node in flight
blocks on an event only the test sets, so the stream is provably closed inside the step.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import CheckpointStore
from stargraph.graph import END, START, Graph
from stargraph.runtime import NodeStarted

pytestmark = pytest.mark.stores("memory", "sqlite")

TIMEOUT = 30.0  # only to catch a hang

CALLS: Counter[str] = Counter()
INSIDE = threading.Event()  # the slow node runs
RELEASE = threading.Event()  # the test lets it finish


class S(BaseModel):
    n: int = 0
    log: Annotated[list[str], reducers.append] = []


def first(state: S) -> dict[str, Any]:
    CALLS["first"] += 1
    return {"n": 1, "log": ["first"]}


def slow(state: S) -> dict[str, Any]:
    CALLS["slow"] += 1
    INSIDE.set()
    if not RELEASE.wait(TIMEOUT):
        raise TimeoutError("the test never released the node")
    CALLS["slow finished"] += 1
    return {"n": state.n * 10, "log": ["slow"]}


async def aslow(state: S) -> dict[str, Any]:
    CALLS["slow"] += 1
    INSIDE.set()
    if not await asyncio.to_thread(RELEASE.wait, TIMEOUT):
        raise TimeoutError("the test never released the node")
    CALLS["slow finished"] += 1
    return {"n": state.n * 10, "log": ["slow"]}


def after(state: S) -> dict[str, Any]:
    CALLS["after"] += 1
    return {"n": state.n + 5, "log": ["after"]}


def _graph(node: Callable[..., Any]) -> Graph[S]:
    return (
        Graph("closing", state=S)
        .with_node("first", first)
        .with_node("slow", node)
        .with_node("after", after)
        .with_edge(START, "first")
        .with_edge("first", "slow")
        .with_edge("slow", "after")
        .with_edge("after", END)
    )


REFERENCE = S(n=15, log=["first", "slow", "after"])


def _reset() -> None:
    CALLS.clear()
    INSIDE.clear()
    RELEASE.clear()


def _uninterrupted(node: Callable[..., Any]) -> S:
    _reset()
    RELEASE.set()
    state = _graph(node).compile().invoke({})
    _reset()
    return state


def _closed_in_slow_step(store: CheckpointStore, run_id: str) -> None:
    record = store.get_run(run_id)
    assert (record.status, record.last_step, record.stopped_by) == (
        "cancelled",
        2,
        "its event stream was closed",
    )
    assert CALLS == {"first": 1, "slow": 1, "slow finished": 1}


def test_issue44_sync_stream_closed_mid_step_commits_it_and_resumes(
    store: CheckpointStore,
) -> None:
    assert _uninterrupted(slow) == REFERENCE
    app = _graph(slow).compile(store=store)
    stream = app.stream({}, run_id="s")
    for event in stream:
        if isinstance(event, NodeStarted) and event.node == "slow":
            break
    assert INSIDE.wait(TIMEOUT)
    RELEASE.set()  # the step in flight finishes while the stream closes
    stream.close()
    _closed_in_slow_step(store, "s")
    assert app.get_state("s") == S(n=10, log=["first", "slow"])
    assert app.resume("s") == REFERENCE
    assert CALLS == {"first": 1, "slow": 1, "slow finished": 1, "after": 1}
    assert store.get_run("s").status == "done"


@pytest.mark.parametrize("node", [slow, aslow], ids=["sync-node", "async-node"])
def test_issue44_async_stream_closed_mid_step_commits_it_and_resumes(
    store: CheckpointStore, node: Callable[..., Any]
) -> None:
    assert _uninterrupted(node) == REFERENCE
    app = _graph(node).compile(store=store)

    async def main() -> S:
        stream = app.astream({}, run_id="a")
        async for event in stream:
            if isinstance(event, NodeStarted) and event.node == "slow":
                break
        assert await asyncio.to_thread(INSIDE.wait, TIMEOUT)
        # Released only once aclose has begun: a driver that dropped the step would have
        # cancelled its tasks before this callback runs.
        asyncio.get_running_loop().call_soon(RELEASE.set)
        await asyncio.wait_for(stream.aclose(), TIMEOUT)  # type: ignore[attr-defined]
        _closed_in_slow_step(store, "a")
        assert app.get_state("a") == S(n=10, log=["first", "slow"])
        return await app.aresume("a")

    assert asyncio.run(main()) == REFERENCE
    assert CALLS == {"first": 1, "slow": 1, "slow finished": 1, "after": 1}
    assert store.get_run("a").status == "done"


def test_issue44_async_stream_closed_in_its_last_step_finishes_the_run(
    store: CheckpointStore,
) -> None:
    app = (
        Graph("last", state=S)
        .with_node("first", first)
        .with_node("slow", aslow)
        .with_edge(START, "first")
        .with_edge("first", "slow")
        .with_edge("slow", END)
        .compile(store=store)
    )
    _reset()

    async def main() -> None:
        stream = app.astream({}, run_id="l")
        async for event in stream:
            if isinstance(event, NodeStarted) and event.node == "slow":
                break
        assert await asyncio.to_thread(INSIDE.wait, TIMEOUT)
        asyncio.get_running_loop().call_soon(RELEASE.set)
        await asyncio.wait_for(stream.aclose(), TIMEOUT)  # type: ignore[attr-defined]

    asyncio.run(main())
    record = store.get_run("l")
    assert (record.status, record.last_step) == ("done", 2)
    assert app.get_state("l") == S(n=10, log=["first", "slow"])


def test_issue44_without_a_store_both_drivers_let_the_step_finish() -> None:
    app = _graph(aslow).compile()
    _reset()
    stream = app.stream({})
    for event in stream:
        if isinstance(event, NodeStarted) and event.node == "slow":
            break
    assert INSIDE.wait(TIMEOUT)
    RELEASE.set()
    stream.close()
    sync_calls = dict(CALLS)
    _reset()

    async def main() -> None:
        astream = app.astream({})
        async for event in astream:
            if isinstance(event, NodeStarted) and event.node == "slow":
                break
        assert await asyncio.to_thread(INSIDE.wait, TIMEOUT)
        asyncio.get_running_loop().call_soon(RELEASE.set)
        await asyncio.wait_for(astream.aclose(), TIMEOUT)  # type: ignore[attr-defined]

    asyncio.run(main())
    assert sync_calls == dict(CALLS) == {"first": 1, "slow": 1, "slow finished": 1}
