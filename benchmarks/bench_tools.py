"""Dispatch overhead of the tool arbiter (issue 6 acceptance: < 100 us median).

A no-op tool with one lock and one argument goes through the whole pipeline (strict argument
validation, allowlist, policy hook, lockset acquire/release, execution on a worker thread under
a timeout, hash-chained commit-log append to SQLite in WAL mode) and is compared with calling
the same function directly.

    .venv/bin/python benchmarks/bench_tools.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from stargraph.tools import Arbiter, SqliteCommitLog, ToolCall, ToolRegistry, tool


def noop(path: str) -> None:
    """Do nothing (the body whose cost is subtracted out)."""
    return None


async def anoop(path: str) -> None:
    """Do nothing, asynchronously."""
    return None


def _median_us(fn: Callable[[], object], calls: int) -> float:
    for _ in range(min(1000, calls)):  # warm caches, threads and the SQLite page cache
        fn()
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


async def _amedian_us(arbiter: Arbiter, call: ToolCall, calls: int) -> float:
    for _ in range(min(1000, calls)):
        await arbiter.adispatch(call)
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        await arbiter.adispatch(call)
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


def main() -> None:
    """Run the benchmark and print median microseconds per call."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20_000)
    calls = parser.parse_args().calls

    sync_tool = tool(id="bench.noop@1.0.0", description="No-op.", locks=("file:{path}:S",))(noop)
    async_tool = tool(id="bench.anoop@1.0.0", description="No-op.", locks=("file:{path}:S",))(anoop)
    registry = ToolRegistry.build(builtins=[sync_tool, async_tool])
    with tempfile.TemporaryDirectory() as tmp:
        log = SqliteCommitLog(Path(tmp) / "stargraph.db")
        with Arbiter(
            registry,
            workspace=Path(tmp) / "ws",
            commit_log=log,
            policies=[lambda call: None],
        ) as arbiter:
            allowed = ("bench.*",)
            call = ToolCall(tool="bench.noop", args={"path": "a.txt"}, lane="core", allowed=allowed)
            acall = call.model_copy(update={"tool": "bench.anoop"})
            direct = _median_us(lambda: noop("a.txt"), calls)
            sync = _median_us(lambda: arbiter.dispatch(call), calls)
            asynchronous = asyncio.run(_amedian_us(arbiter, acall, calls))
            records = len(log)
            intact = log.verify_chain() is None
        log.close()
    print(f"calls per measurement     {calls}")
    print(f"direct function call      {direct:8.2f} us median")
    print(f"dispatch (sync tool)      {sync:8.2f} us median  ({sync / direct:,.0f}x direct)")
    print(
        f"adispatch (async tool)    {asynchronous:8.2f} us median  "
        f"({asynchronous / direct:,.0f}x direct)"
    )
    print(f"commit records written    {records} (chain intact: {intact})")
    print(f"budget 100 us             {'met' if max(sync, asynchronous) < 100 else 'MISSED'}")


if __name__ == "__main__":
    main()
