"""Branches that wait: wall time of a step whose tasks each wait on a (simulated) model.

Run: ``.venv/bin/python benchmarks/bench_concurrency.py``, or as the ``concurrency`` section
of ``python -m benchmarks`` (``--only concurrency``).

Three workloads, each timed by wall clock (waiting is the point here, so CPU time says
nothing), with default settings on both engines, in one process:

- three sync branches from START, each ``time.sleep(1.0)``: stargraph ``invoke`` and
  LangGraph ``invoke``; plain Python is three threads joined;
- the same with ``async`` nodes awaiting ``asyncio.sleep(1.0)``, under ``ainvoke``;
- a 20-branch fan-out whose branches sleep a seeded random 0-100 ms, 10 runs: the final state
  and the order of ``node_finished`` events must be the same in every run however the
  branches finish (they merge in task order).

The target (a step takes as long as its slowest task, plus a little): under 1.3 s for the
three 1 s branches.
"""

from __future__ import annotations

import asyncio
import operator
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import BaseModel
from typing_extensions import TypedDict

from stargraph import END, START, Graph, reducers

__all__ = ["SECTIONS", "concurrency_section"]

TARGET_S = 1.3
WAIT_S = 1.0


class Fan(BaseModel):
    """The branches' shared state: one item per branch, merged by the append reducer."""

    items: Annotated[list[str], reducers.append] = []


class LGFan(TypedDict):
    """LangGraph's form of :class:`Fan`."""

    items: Annotated[list[str], operator.add]


def _sync_node(name: str) -> Callable[[Any], dict[str, Any]]:
    def node(state: Any) -> dict[str, Any]:
        time.sleep(WAIT_S)
        return {"items": [name]}

    node.__name__ = node.__qualname__ = f"wait_{name}"
    node.__module__ = __name__
    return node


def _async_node(name: str) -> Callable[[Any], Any]:
    async def node(state: Any) -> dict[str, Any]:
        await asyncio.sleep(WAIT_S)
        return {"items": [name]}

    node.__name__ = node.__qualname__ = f"await_{name}"
    node.__module__ = __name__
    return node


NAMES = ("a", "b", "c")
for _n in NAMES:
    globals()[f"wait_{_n}"] = _sync_node(_n)
    globals()[f"await_{_n}"] = _async_node(_n)

JITTER: dict[str, float] = {f"w{i:02d}": random.Random(i).uniform(0.0, 0.1) for i in range(20)}


def _jittered(name: str) -> Callable[[Any], dict[str, Any]]:
    def node(state: Any) -> dict[str, Any]:
        time.sleep(JITTER[name])
        return {"items": [name]}

    node.__name__ = node.__qualname__ = f"jitter_{name}"
    node.__module__ = __name__
    return node


for _n in JITTER:
    globals()[f"jitter_{_n}"] = _jittered(_n)


def _stargraph(prefix: str, names: Sequence[str]) -> Any:
    graph = Graph(f"branches_{prefix}", state=Fan)
    for name in names:
        fn = globals()[f"{prefix}_{name}"]
        graph = graph.with_node(name, fn).with_edge(START, name).with_edge(name, END)
    return graph.compile()


def _langgraph(prefix: str, names: Sequence[str]) -> Any:
    from langgraph.graph import END as LG_END
    from langgraph.graph import START as LG_START
    from langgraph.graph import StateGraph

    builder = StateGraph(LGFan)
    for name in names:
        builder.add_node(name, globals()[f"{prefix}_{name}"])
        builder.add_edge(LG_START, name)
        builder.add_edge(name, LG_END)
    return builder.compile()


def _wall(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _plain_threads() -> None:
    threads = [threading.Thread(target=time.sleep, args=(WAIT_S,)) for _ in NAMES]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


async def _plain_gather() -> None:
    await asyncio.gather(*(asyncio.sleep(WAIT_S) for _ in NAMES))


def three_branches() -> dict[str, dict[str, float]]:
    """Wall seconds of the three 1 s branches, sync and async, per engine."""
    sg_sync, lg_sync = _stargraph("wait", NAMES), _langgraph("wait", NAMES)
    sg_async, lg_async = _stargraph("await", NAMES), _langgraph("await", NAMES)
    out = {
        "sync": {
            "stargraph": _wall(lambda: sg_sync.invoke({})),
            "langgraph": _wall(lambda: lg_sync.invoke({"items": []})),
            "plain": _wall(_plain_threads),
        },
        "async": {
            "stargraph": _wall(lambda: asyncio.run(sg_async.ainvoke({}))),
            "langgraph": _wall(lambda: asyncio.run(lg_async.ainvoke({"items": []}))),
            "plain": _wall(lambda: asyncio.run(_plain_gather())),
        },
    }
    sg_sync.close()
    sg_async.close()
    return out


def jittered_fanout(runs: int = 10) -> tuple[float, bool]:
    """Median wall seconds of the 20-branch fan-out, and whether every run agreed."""
    app = _stargraph("jitter", sorted(JITTER))
    outcomes: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()
    walls = []
    for _ in range(runs):
        started = time.perf_counter()
        items = list(app.stream({}, mode=["events", "values"]))
        walls.append(time.perf_counter() - started)
        finished = tuple(e.node for m, e in items if m == "events" and e.kind == "node_finished")
        final = [v for m, v in items if m == "values"][-1]
        outcomes.add((tuple(final.items), finished))
    app.close()
    walls.sort()
    return walls[len(walls) // 2], len(outcomes) == 1


def concurrency_section(*, quick: bool, rounds: int) -> tuple[str, list[str]]:
    """The ``concurrency`` report section of ``python -m benchmarks``."""
    del quick, rounds  # one timing each: the waits dwarf any noise
    walls = three_branches()
    lines = ["Three branches that each wait 1 s (wall seconds; target < 1.3)"]
    lines.append(f"  {'':<8}{'stargraph':>11}{'langgraph':>11}{'plain':>9}")
    misses = []
    for kind, row in walls.items():
        lines.append(
            f"  {kind:<8}{row['stargraph']:>11.3f}{row['langgraph']:>11.3f}{row['plain']:>9.3f}"
        )
        if row["stargraph"] >= TARGET_S:
            misses.append(f"three {kind} 1 s branches took {row['stargraph']:.2f} s (target 1.3)")
    median, same = jittered_fanout()
    lines.append(
        f"20-branch fan-out, random 0-100 ms waits: median {median:.3f} s over 10 runs; "
        f"same final state and event order in every run: {'yes' if same else 'NO'}"
    )
    if not same:
        misses.append("the jittered fan-out's outcome differed between runs")
    return "\n".join(lines), misses


SECTIONS = {"concurrency": concurrency_section}
"""This module's report sections by ``--only`` name."""


if __name__ == "__main__":
    text, missed = concurrency_section(quick=False, rounds=1)
    print(text)
    for miss in missed:
        print(f"  missed: {miss}")
    sys.exit(0)
