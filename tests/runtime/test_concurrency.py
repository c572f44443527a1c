"""The tasks of a step run concurrently by default; merges and events stay in task order."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.graph import END, START, Graph

TIMEOUT = 10.0  # generous: a rendezvous that is never reached fails the test after this


class Fan(BaseModel):
    items: Annotated[list[str], reducers.append] = []


# --------------------------------------------------------------------------- sync branches

BARRIER = threading.Barrier(3)


def _meet(name: str) -> dict[str, Any]:
    # All three branches must be inside their bodies at once to pass: run one after
    # another, the first waits alone until the timeout and the barrier breaks.
    BARRIER.wait(timeout=TIMEOUT)
    time.sleep(1.0)  # the model call the issue describes
    return {"items": [name]}


def sync_a(state: Fan) -> dict[str, Any]:
    return _meet("a")


def sync_b(state: Fan) -> dict[str, Any]:
    return _meet("b")


def sync_c(state: Fan) -> dict[str, Any]:
    return _meet("c")


def _three(a: Any, b: Any, c: Any) -> Graph[Fan]:
    graph = Graph("three", state=Fan)
    for name, fn in (("a", a), ("b", b), ("c", c)):
        graph = graph.with_node(name, fn).with_edge(START, name).with_edge(name, END)
    return graph


def test_issue18_three_sync_branches_run_together_by_default() -> None:
    BARRIER.reset()
    app = _three(sync_a, sync_b, sync_c).compile()
    state = app.invoke({})
    # The barrier proves the overlap (wall times: benchmarks/bench_concurrency.py).
    assert state.items == ["a", "b", "c"]  # merged in task order, whatever finished first
    app.close()


# -------------------------------------------------------------------------- async branches

ARRIVED: dict[str, Any] = {}
SYNC_IN = threading.Event()


async def _arrive(name: str) -> None:
    # Wait, on the loop, until the other async branch and the sync one are inside too.
    ARRIVED[name] = asyncio.get_running_loop()
    deadline = time.monotonic() + TIMEOUT
    while not (len(ARRIVED) == 2 and SYNC_IN.is_set()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}: the other branches never ran alongside it")
        await asyncio.sleep(0.005)


async def async_a(state: Fan) -> dict[str, Any]:
    await _arrive("a")
    await asyncio.sleep(1.0)
    return {"items": ["a"]}


async def async_b(state: Fan) -> dict[str, Any]:
    await _arrive("b")
    await asyncio.sleep(1.0)
    return {"items": ["b"]}


def sync_waits_for_async(state: Fan) -> dict[str, Any]:
    SYNC_IN.set()
    deadline = time.monotonic() + TIMEOUT
    while len(ARRIVED) < 2:  # both coroutines must be running while this thread blocks
        if time.monotonic() > deadline:
            raise TimeoutError("the async branches never ran while the sync one blocked")
        time.sleep(0.005)
    time.sleep(1.0)
    return {"items": ["c"]}


def test_issue18_async_and_sync_branches_of_one_step_run_together() -> None:
    ARRIVED.clear()
    SYNC_IN.clear()
    app = _three(async_a, async_b, sync_waits_for_async).compile()
    state = app.invoke({})
    assert state.items == ["a", "b", "c"]
    # The two coroutines shared one loop (the run's), not one each.
    assert ARRIVED["a"] is ARRIVED["b"]
    app.close()


def test_issue18_the_same_under_ainvoke() -> None:
    ARRIVED.clear()
    SYNC_IN.clear()
    app = _three(async_a, async_b, sync_waits_for_async).compile()

    async def main() -> tuple[Fan, asyncio.AbstractEventLoop]:
        return await app.ainvoke({}), asyncio.get_running_loop()

    state, loop = asyncio.run(main())
    assert state.items == ["a", "b", "c"]
    assert ARRIVED["a"] is loop  # ainvoke runs async nodes on the caller's loop
    app.close()


# ------------------------------------------------------------------- determinism under load

IN_FLIGHT = [0, 0]  # now, most at once
LOCK = threading.Lock()


def branch(state: Fan) -> dict[str, Any]:
    with LOCK:
        IN_FLIGHT[0] += 1
        IN_FLIGHT[1] = max(IN_FLIGHT[1], IN_FLIGHT[0])
    time.sleep(random.random() * 0.004)  # a different finishing order every run
    with LOCK:
        IN_FLIGHT[0] -= 1
    return {"items": [f"{len(state.items)}"]}


def seed(state: Fan) -> dict[str, Any]:
    return {"items": ["seed"]}


def gather(state: Fan) -> dict[str, Any]:
    return {"items": [f"gathered {len(state.items)}"]}


def _wide(n: int) -> Graph[Fan]:
    graph = Graph("wide", state=Fan).with_node("seed", seed).with_node("gather", gather)
    graph = graph.with_edge(START, "seed").with_edge("gather", END)
    names = [f"b{i:02d}" for i in range(n)]
    for name in names:
        graph = graph.with_node(name, branch).with_edge("seed", name)
    return graph.with_edge(names, "gather")


def test_issue18_fifty_runs_of_a_twenty_branch_fan_out_agree() -> None:
    IN_FLIGHT[:] = [0, 0]
    app = _wide(20).compile()
    seen = set()
    for _ in range(50):
        events = list(app.stream({}))
        order = tuple(
            (e.kind, e.step, e.node, getattr(e, "index", None), str(getattr(e, "writes", "")))
            for e in events
            if e.kind != "run_started"
        )
        final = events[-1]
        assert final.kind == "run_finished"
        seen.add((order, str(final.state)))
    assert len(seen) == 1  # identical final state and identical event order, 50 times
    assert IN_FLIGHT[1] > 1  # and the branches did overlap
    app.close()


# ------------------------------------------------------------------------------ inline=True

THREADS: dict[str, str] = {}


def where_a(state: Fan) -> dict[str, Any]:
    THREADS["a"] = threading.current_thread().name
    deadline = time.monotonic() + TIMEOUT
    while "b" not in THREADS:  # the driver is busy here: a worker must have taken b
        assert time.monotonic() < deadline, "no worker ran b while the inline node ran"
        time.sleep(0.001)
    return {"items": ["a"]}


def where_b(state: Fan) -> dict[str, Any]:
    THREADS["b"] = threading.current_thread().name
    return {"items": ["b"]}


def where_c(state: Fan) -> dict[str, Any]:
    THREADS["c"] = threading.current_thread().name
    return {"items": ["c"]}


def test_issue18_inline_nodes_stay_on_the_driver_thread() -> None:
    THREADS.clear()
    graph = Graph("inl", state=Fan).with_node("a", where_a, inline=True)
    for name, fn in (("b", where_b), ("c", where_c)):
        graph = graph.with_node(name, fn).with_edge(START, name).with_edge(name, END)
    app = graph.with_edge(START, "a").with_edge("a", END).compile()
    assert app.invoke({}).items == ["a", "b", "c"]
    assert THREADS["a"] == threading.current_thread().name
    # While the driver ran the inline task, a worker ran b alongside it.
    assert THREADS["b"].startswith("stargraph-worker")
    app.close()


def test_issue18_inline_is_hashed_only_when_set() -> None:
    plain = Graph("h", state=Fan).with_node("a", where_a).with_edge(START, "a")
    marked = Graph("h", state=Fan).with_node("a", where_a, inline=True).with_edge(START, "a")
    ir = plain.to_ir()
    assert ir.nodes[0].inline is False
    # Left at its default the field is not part of the hash: graphs hashed before it existed
    # (golden cassettes, stored runs) keep their hashes.
    from stargraph.ir import GraphIR

    data = ir.model_dump(mode="json")
    del data["nodes"][0]["inline"]
    assert GraphIR.model_validate(data).graph_hash == ir.graph_hash
    assert marked.to_ir().graph_hash != ir.graph_hash


def test_issue18_the_first_failure_in_task_order_is_reported() -> None:
    FAILED_B.clear()
    graph = Graph("fails", state=Fan)
    graph = graph.with_node("a", fail_late).with_node("b", fail_early)
    graph = graph.with_edge(START, "a").with_edge(START, "b").with_edge("a", END)
    graph = graph.with_edge("b", END)
    from stargraph.errors import NodeError

    with pytest.raises(NodeError) as info:
        graph.compile().invoke({})
    assert info.value.node == "a"  # b failed first in time; a comes first in task order


FAILED_B = threading.Event()


def fail_late(state: Fan) -> dict[str, Any]:
    FAILED_B.wait(TIMEOUT)
    raise ValueError("a broke")


def fail_early(state: Fan) -> dict[str, Any]:
    try:
        raise ValueError("b broke")
    finally:
        FAILED_B.set()


def exits_on_worker(state: Fan) -> dict[str, Any]:
    THREADS["b"] = threading.current_thread().name
    raise SystemExit(3)


def test_issue18_a_base_exception_on_a_worker_reaches_the_caller() -> None:
    THREADS.clear()
    graph = Graph("inl", state=Fan).with_node("a", where_a, inline=True)
    graph = graph.with_node("b", exits_on_worker).with_edge(START, "b").with_edge("b", END)
    app = graph.with_edge(START, "a").with_edge("a", END).compile()
    with pytest.raises(SystemExit):
        app.invoke({})  # raised on the worker, re-raised here: the step does not hang
    assert THREADS["b"].startswith("stargraph-worker")
    app.close()


WIDE = threading.Barrier(20)


def meets_nineteen_others(state: Fan) -> dict[str, Any]:
    WIDE.wait(timeout=TIMEOUT)  # passes only with all twenty inside at once
    return {"items": ["met"]}


def test_issue18_twenty_blocking_branches_each_get_a_thread() -> None:
    WIDE.reset()
    graph = Graph("twenty", state=Fan)
    for i in range(20):
        name = f"w{i:02d}"
        graph = graph.with_node(name, meets_nineteen_others).with_edge(START, name)
        graph = graph.with_edge(name, END)
    assert graph.compile().invoke({}).items == ["met"] * 20
