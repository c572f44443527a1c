"""Stream and async modes at invoke speed: what each way of running a graph costs.

Run: ``.venv/bin/python benchmarks/bench_modes.py [--quick]``, or as the ``modes`` section
of ``python -m benchmarks`` (``--only modes``). ``--quick`` (50 runs a row, two rounds, a
few seconds) is a smoke check; its ratios are noisy on a shared machine.

Each row runs the same graph one way - ``invoke``, ``stream`` in a mode (the whole stream
read), ``ainvoke``, ``astream`` - on the 10-node chain and the 4-node fan-out of the core
workloads, in stargraph and in LangGraph (``stream_mode=`` of the same name; LangGraph's
``debug`` mode stands in for ``events``). The async rows await N runs inside ONE running
event loop, as a server does: ``asyncio.run`` per call costs the same for any engine and is
left out. A figure is the best of the rounds of process CPU time per run (CPU time, so that
other processes on a shared machine do not blur it), the engines interleaved round by round.

Targets, per run: every mode within 1.5x of our own ``invoke`` on the same graph
(``ainvoke`` within 1.3x) and at least 20x faster than LangGraph's same mode.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.workloads import chain_graph, chain_state_graph, fanout_graph, fanout_state_graph

__all__ = ["ASYNC_TARGET", "LANGGRAPH_TARGET", "MODE_TARGET", "SECTIONS", "modes_section"]

MODE_TARGET = 1.5
"""Every stream and astream mode: at most this many times our own ``invoke``."""
ASYNC_TARGET = 1.3
"""``ainvoke``: at most this many times our own ``invoke``."""
LANGGRAPH_TARGET = 20.0
"""Every mode: at least this many times faster than LangGraph's same mode."""

ROWS = (
    "invoke",
    "stream(updates)",
    "stream(values)",
    "stream(events)",
    "ainvoke",
    "astream(updates)",
    "astream(values)",
)

_LG_MODE = {"updates": "updates", "values": "values", "events": "debug"}


def _sync_cases(app: Any, lg: Any, lg_input: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    def stream(mode: str) -> tuple[Callable[[], object], Callable[[], object]]:
        lg_mode = _LG_MODE[mode]
        return (
            lambda: list(app.stream({}, mode=mode)),
            lambda: list(lg.stream(lg_input, stream_mode=lg_mode)),
        )

    return {
        "invoke": (lambda: app.invoke({}), lambda: lg.invoke(lg_input)),
        "stream(updates)": stream("updates"),
        "stream(values)": stream("values"),
        "stream(events)": stream("events"),
    }


def _async_cases(app: Any, lg: Any, lg_input: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    async def astream(graph: Any, *args: Any, **kwargs: Any) -> list[Any]:
        return [item async for item in graph.astream(*args, **kwargs)]

    def modes(mode: str) -> tuple[Callable[[], Any], Callable[[], Any]]:
        return (
            lambda: astream(app, {}, mode=mode),
            lambda: astream(lg, lg_input, stream_mode=mode),
        )

    return {
        "ainvoke": (lambda: app.ainvoke({}), lambda: lg.ainvoke(lg_input)),
        "astream(updates)": modes("updates"),
        "astream(values)": modes("values"),
    }


def _time_sync(fn: Callable[[], object], n: int) -> float:
    started = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - started) / n * 1e6


async def _time_async(fn: Callable[[], Any], n: int) -> float:
    started = time.process_time()
    for _ in range(n):
        await fn()
    return (time.process_time() - started) / n * 1e6


def measure(
    app: Any, lg: Any, lg_input: dict[str, Any], *, n: int, lg_n: int, rounds: int
) -> dict[str, tuple[float, float]]:
    """Best-of-``rounds`` CPU µs per run of each row, ``(stargraph, langgraph)``."""
    best: dict[str, list[float]] = {row: [float("inf"), float("inf")] for row in ROWS}
    sync = _sync_cases(app, lg, lg_input)
    acases = _async_cases(app, lg, lg_input)

    async def async_round() -> None:
        for row, (ours, theirs) in acases.items():
            best[row][0] = min(best[row][0], await _time_async(ours, n))
            best[row][1] = min(best[row][1], await _time_async(theirs, lg_n))

    for ours, theirs in sync.values():  # warm up: imports, caches, first-run costs
        ours()
        theirs()
    for _ in range(rounds):
        gc.collect()  # each round starts on a collected heap (once: LangGraph's is large)
        for row, (ours, theirs) in sync.items():
            best[row][0] = min(best[row][0], _time_sync(ours, n))
            best[row][1] = min(best[row][1], _time_sync(theirs, lg_n))
        asyncio.run(async_round())
    return {row: (us[0], us[1]) for row, us in best.items()}


def _graphs() -> dict[str, tuple[Any, Any]]:
    return {
        "10-node chain": (
            chain_graph(10).compile(max_steps=20),
            chain_state_graph(10).compile(),
        ),
        "4-node fan-out": (
            fanout_graph(4).compile(max_steps=10),
            fanout_state_graph(4).compile(),
        ),
    }


def render(name: str, figures: dict[str, tuple[float, float]]) -> tuple[str, list[str]]:
    """The table of one graph's rows, and the targets it missed."""
    base = figures["invoke"][0]
    lines = [
        f"{name}: CPU us per run (best of rounds; async rows: awaits in one running loop)",
        f"{'mode':<18}{'stargraph':>11}{'LangGraph':>11}{'LG/sg':>8}{'sg/invoke':>11}",
    ]
    misses = []
    for row, (ours, theirs) in figures.items():
        ratio, own = theirs / ours, ours / base
        lines.append(f"{row:<18}{ours:>11.1f}{theirs:>11.1f}{ratio:>7.1f}x{own:>10.2f}x")
        limit = ASYNC_TARGET if row == "ainvoke" else MODE_TARGET
        if row != "invoke" and own > limit:
            misses.append(f"{name} {row} is {own:.2f}x our invoke (target <= {limit}x)")
        if ratio < LANGGRAPH_TARGET:
            misses.append(
                f"{name} {row} is {ratio:.1f}x faster than LangGraph (target >= "
                f"{LANGGRAPH_TARGET:.0f}x)"
            )
    return "\n".join(lines), misses


def modes_section(*, quick: bool, rounds: int) -> tuple[str, list[str]]:
    """The ``modes`` report section of ``python -m benchmarks``."""
    n, lg_n = (50, 5) if quick else (300, 30)
    lg_input = {"counter": 0, "items": []}
    texts, misses = [], []
    for name, (app, lg) in _graphs().items():
        figures = measure(
            app, lg, lg_input, n=n, lg_n=lg_n, rounds=min(rounds, 2) if quick else rounds
        )
        text, missed = render(name, figures)
        texts.append(text)
        misses += missed
    return "\n\n".join(texts), misses


SECTIONS = {"modes": modes_section}
"""This module's report sections by ``--only`` name."""


def main(argv: Sequence[str]) -> None:
    quick = "--quick" in argv
    text, misses = modes_section(quick=quick, rounds=3 if quick else 5)
    print(text)
    for miss in misses:
        print(f"  missed: {miss}")


if __name__ == "__main__":
    main(sys.argv[1:])
