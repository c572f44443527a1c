"""CPU-heavy branches on Ray (and a process pool) versus the local executor.

    python benchmarks/bench_ray.py [--branches 8] [--seconds 0.5] [--repeat 3] [--cpus 2]

A fan-out of ``--branches`` ``blocking=True`` nodes, each burning about ``--seconds`` of pure
Python CPU. Locally the branches run on threads, which the GIL serialises; with
``compile(executor=RayExecutor())`` they run as Ray tasks on a single-machine cluster that
listens on 127.0.0.1 only (``--cpus`` workers), and with a spawn ``ProcessPoolExecutor`` of
the same size. Every engine must reach the same final state. Printed: the best wall time of
``--repeat`` runs per engine and the speedup over local, then the per-run cost of a trivial
20-branch fan-out (the seam's overhead).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from stargraph import reducers  # noqa: E402
from stargraph.graph import END, START, Graph  # noqa: E402
from stargraph.runtime import RunContext  # noqa: E402


class Burn(BaseModel):
    sums: Annotated[dict[str, int], reducers.merge] = {}


def fan_start(state: Burn) -> dict[str, Any]:
    return {}


def burn(state: Burn, ctx: RunContext) -> dict[str, Any]:
    """About ``config['n']`` iterations of pure-Python arithmetic (holds the GIL)."""
    total = 0
    for i in range(int(ctx.config["n"])):
        total = (total + i * i) % 1_000_003
    return {"sums": {ctx.node: total}}


def fan_join(state: Burn) -> dict[str, Any]:
    return {}


def fan(branches: int, n: int) -> Graph[Burn]:
    names = [f"b{i:02d}" for i in range(branches)]
    graph = Graph("burn", state=Burn).with_node("start", fan_start).with_node("join", fan_join)
    for name in names:
        graph = graph.with_node(name, burn, blocking=True, config={"n": n})
        graph = graph.with_edge("start", name)
    return graph.with_edge(START, "start").with_edge(names, "join").with_edge("join", END)


def calibrate(seconds: float) -> int:
    """Iterations of :func:`burn` that take about ``seconds`` on this machine."""
    n = 200_000
    while True:
        took = min(_once(n) for _ in range(3))
        if took > 0.2:
            return int(n * seconds / took)
        n *= 2


def _once(n: int) -> float:
    started = time.perf_counter()
    burn(Burn(), _ctx(n))
    return time.perf_counter() - started


def _ctx(n: int) -> RunContext:
    from stargraph.runtime import SystemEntropy

    return RunContext(
        run_id="cal", step=1, node="b", index=0, path=(), config={"n": n}, entropy=SystemEntropy()
    )


def timed(graph: Graph[Burn], executor: Any, repeat: int) -> tuple[list[float], Burn]:
    app = graph.compile(executor=executor)
    times, final = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        final = app.invoke({})
        times.append(time.perf_counter() - started)
    app.close()
    assert final is not None
    return times, final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--branches", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args(argv)

    # Nodes are imported by path in the workers: use this module by its package name.
    mod: Any = importlib.import_module("benchmarks.bench_ray")
    from stargraph.runtime.ray import RayExecutor, init_local

    n = mod.calibrate(args.seconds)
    heavy = mod.fan(args.branches, n)
    print(
        f"{args.branches} branches x ~{args.seconds}s of pure-Python CPU (n={n}), "
        f"{os.cpu_count()} cores, best of {args.repeat}"
    )

    started = time.perf_counter()
    init_local(
        num_cpus=args.cpus,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
    )
    print(f"ray.init (127.0.0.1 only): {time.perf_counter() - started:.1f}s")
    import ray

    ray_ex = RayExecutor()
    pool = concurrent.futures.ProcessPoolExecutor(
        args.cpus, mp_context=multiprocessing.get_context("spawn")
    )
    try:
        # Warm up: workers started and this module imported in them.
        for ex in (ray_ex, pool):
            timed(mod.fan(args.cpus * 2, 1000), ex, 2)
        results: dict[str, tuple[list[float], Burn]] = {}
        for name, ex in (("local threads", None), ("ray", ray_ex), ("process pool", pool)):
            results[name] = timed(heavy, ex, args.repeat)
        finals = {final for _, final in results.values() for final in [final.model_dump_json()]}
        assert len(finals) == 1, "engines disagree on the final state"
        base = min(results["local threads"][0])
        for name, (times, _) in results.items():
            best = min(times)
            print(
                f"  {name:<14} best {best:6.2f}s  median {statistics.median(times):6.2f}s  "
                f"speedup x{base / best:.2f}"
            )

        trivial = mod.fan(20, 10)
        print("trivial 20-branch fan-out, per run (the seam's overhead):")
        for name, ex in (("local threads", None), ("ray", ray_ex), ("process pool", pool)):
            times, _ = timed(trivial, ex, 20)
            print(f"  {name:<14} median {statistics.median(times) * 1000:7.1f} ms")
    finally:
        pool.shutdown()
        ray_ex.shutdown()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
