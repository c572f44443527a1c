"""What stargraph adds to an MCP tool call, beyond the server's own time (issue 49: <= 1 ms).

``mcp`` section of ``python -m benchmarks`` (``--only mcp``), or on its own:

    .venv/bin/python benchmarks/bench_mcp.py [--calls 300] [--rounds 7]

The same tool (server-everything's ``echo``, over stdio, installed by
``scripts/ensure_mcp_servers.sh``) is called, per call, three ways, each on its own server
process:

* **direct**: ``await client.call_tool(...)`` on the ``mcp`` SDK's own client session, in the
  event loop that owns it: the server's time plus the SDK's, the floor;
* **dispatch**: ``Arbiter.dispatch(ToolCall(...))`` on a registry built from the
  ``McpServer``: argument validation, the server's lock, the call under its timeout, the
  output mapping and the audit record of an external tool in a SQLite commit log;
* **in a run**: the same dispatches made by a node of a durable run (SQLite store), so each
  call is also journalled in the run's task journal (what resume serves back); the run's own
  start and commit are amortised over the calls of the node.

The rows are interleaved round by round so a neighbour's burst of work hits them alike; each
row's figure is the median of its rounds' per-call medians, and its overhead is that minus
the direct row's. The target is :data:`OVERHEAD_BUDGET_US` for ``dispatch`` and ``in a run``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel

__all__ = [
    "MESSAGE",
    "OVERHEAD_BUDGET_US",
    "SECTIONS",
    "everything_command",
    "mcp_section",
    "per_call_us",
]

ROOT = Path(__file__).resolve().parents[1]
OVERHEAD_BUDGET_US: Final = 1000.0
"""What stargraph may add to an MCP tool call, beyond the server's own time (µs)."""

MESSAGE: Final = "hello from the benchmark"
DIRECT: Final = "direct: mcp SDK client session"
DISPATCH: Final = "Arbiter.dispatch"
IN_RUN: Final = "in a run (journalled, SQLite)"


def everything_command() -> list[str]:
    """server-everything over stdio, installed by scripts/ensure_mcp_servers.sh."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests import mcp_servers

    return mcp_servers.everything()


def _median_us(fn: Callable[[], object], calls: int) -> float:
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


class _Direct:
    """The SDK's client on its own event loop (this thread's), as an SDK user calls it."""

    def __init__(self, command: list[str]) -> None:
        self.loop = asyncio.new_event_loop()
        self.command = command
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[Any] = self.loop.create_future()
        self._holder = self.loop.create_task(self._hold())
        self.client = self.loop.run_until_complete(self._ready)

    async def _hold(self) -> None:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=self.command[0], args=self.command[1:])
        try:
            with open(os.devnull, "w") as quiet:  # the server prints a banner
                async with Client(stdio_client(params, errlog=quiet), cache=None) as client:
                    self._ready.set_result(client)
                    await self._stop.wait()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            raise

    def call(self) -> Any:
        return self.loop.run_until_complete(self.client.call_tool("echo", {"message": MESSAGE}))

    def median_us(self, calls: int) -> float:
        async def timed() -> float:
            samples = []
            for _ in range(calls):
                start = time.perf_counter_ns()
                await self.client.call_tool("echo", {"message": MESSAGE})
                samples.append(time.perf_counter_ns() - start)
            return statistics.median(samples) / 1000

        return self.loop.run_until_complete(timed())

    def close(self) -> None:
        self._stop.set()
        self.loop.run_until_complete(self._holder)
        self.loop.close()


class _Echoes(BaseModel):
    """State of the in-run row: how many calls the node made."""

    made: int = 0


def _echoes(state: _Echoes, ctx: Any) -> dict[str, Any]:
    from stargraph.tools import ToolCall

    arbiter, calls, samples = ctx.services["arbiter"], ctx.services["calls"], ctx.services["out"]
    call = ToolCall(tool="mcp.everything.echo", args={"message": MESSAGE})
    for _ in range(calls):
        start = time.perf_counter_ns()
        arbiter.dispatch(call)
        samples.append(time.perf_counter_ns() - start)
    return {"made": calls}


def per_call_us(calls: int, rounds: int) -> dict[str, float]:
    """Median over ``rounds`` of each row's median µs per call, ``calls`` calls a round."""
    command = everything_command()
    # server-everything lists a tool whose schema the validator cannot check: it is left out
    # (and logged) at each start, which says nothing about speed.
    quiet = logging.getLogger("stargraph.tools")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return _per_call_us(command, calls, rounds)
    finally:
        quiet.setLevel(level)


def _per_call_us(command: list[str], calls: int, rounds: int) -> dict[str, float]:
    from stargraph import END, START, Graph
    from stargraph.checkpoint import SqliteStore
    from stargraph.tools import Arbiter, McpServer, SqliteCommitLog, ToolCall, ToolRegistry

    rows: dict[str, list[float]] = {DIRECT: [], DISPATCH: [], IN_RUN: []}
    with tempfile.TemporaryDirectory(prefix="stargraph-bench-mcp-") as tmp:
        direct = _Direct(command)
        log = SqliteCommitLog(Path(tmp) / "log.db")
        store = SqliteStore(str(Path(tmp) / "runs.db"))
        arbiter = Arbiter(
            ToolRegistry.build(mcp=[McpServer(command=command, name="everything")]),
            workspace=Path(tmp) / "ws",
            commit_log=log,
        )
        samples: list[int] = []
        app = (
            Graph("mcp-echoes", state=_Echoes)
            .with_node("echoes", _echoes)
            .with_edge(START, "echoes")
            .with_edge("echoes", END)
            .compile(store=store, services={"arbiter": arbiter, "calls": calls, "out": samples})
        )
        try:
            call = ToolCall(tool="mcp.everything.echo", args={"message": MESSAGE})
            assert direct.call().content[0].text == f"Echo: {MESSAGE}"
            assert arbiter.dispatch(call).summary == f"Echo: {MESSAGE}"
            for _ in range(min(200, calls)):  # warm: both servers' JITs, caches, threads
                direct.call()
                arbiter.dispatch(call)
            for i in range(rounds):
                rows[DIRECT].append(direct.median_us(calls))
                rows[DISPATCH].append(_median_us(lambda: arbiter.dispatch(call), calls))
                samples.clear()
                assert app.invoke({}, run_id=f"round-{i}").made == calls
                rows[IN_RUN].append(statistics.median(samples) / 1000)
        finally:
            arbiter.close()
            direct.close()
            store.close()
            log.close()
    return {name: statistics.median(figures) for name, figures in rows.items()}


def _lines(costs: dict[str, float], calls: int, rounds: int) -> tuple[list[str], list[str]]:
    floor = costs[DIRECT]
    lines = [
        f"mcp: server-everything's echo over stdio, {calls} calls x {rounds} rounds "
        "(median of the rounds' medians, µs per call; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)",
        "",
        f"  {'how':<32} {'µs/call':>9} {'over direct':>12}",
    ]
    missed = []
    for name, figure in costs.items():
        over = figure - floor
        lines.append(f"  {name:<32} {figure:>9.1f} {'' if name == DIRECT else f'{over:+.1f}':>12}")
        if name != DIRECT and over > OVERHEAD_BUDGET_US:
            missed.append(
                f"mcp: {name} adds {over:.0f} µs per call over the SDK's own session "
                f"(target <= {OVERHEAD_BUDGET_US:.0f} µs)"
            )
    verdict = "met" if not missed else "MISSED"
    lines.append(f"  target: stargraph adds <= {OVERHEAD_BUDGET_US:.0f} µs per call: {verdict}")
    return lines, missed


def mcp_section(*, quick: bool, rounds: int) -> tuple[str, list[str]]:
    """The ``mcp`` report section of ``python -m benchmarks``."""
    calls = 60 if quick else 300
    rounds = max(rounds, 3)
    lines, missed = _lines(per_call_us(calls, rounds), calls, rounds)
    return "\n".join(lines), missed


SECTIONS = {"mcp": mcp_section}
"""This module's report sections by ``--only`` name."""


def main() -> int:
    """Run the benchmark on its own; 1 if the overhead target is missed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    lines, missed = _lines(per_call_us(args.calls, args.rounds), args.calls, args.rounds)
    print("\n".join(lines))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
