"""Check, time and tabulate the workloads; measure ``import stargraph``.

For each workload: build it on every engine (untimed), run each once and check that all of
them reach the expected final state (abort otherwise), then time ``rounds`` rounds. Engines
are interleaved within a round so drift in machine speed hits them alike. A round times
``invocations`` back-to-back invocations; its figure is elapsed time divided by the node
executions it performed, and the table shows the median over rounds.

Report sections follow the table (:func:`all_sections`: the durable SQLite chain and the bytes
stored per run, from :mod:`benchmarks.durable`); ``--only`` selects workloads and sections
by name.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from benchmarks.workloads import ENGINES, Snapshot, Workload, all_workloads, snapshot

if TYPE_CHECKING:
    from benchmarks.durable import Section

__all__ = [
    "IMPORT_BUDGET_MS",
    "LANGGRAPH_TARGET",
    "PLAIN_TARGET",
    "StateMismatch",
    "WorkloadResult",
    "all_sections",
    "check_agreement",
    "import_time_ms",
    "main",
    "time_workload",
]

LANGGRAPH_TARGET = 30.0
"""stargraph must be at least this many times faster per node than LangGraph."""

PLAIN_TARGET = 10.0
"""stargraph must be within this factor of the plain-Python baseline."""

IMPORT_BUDGET_MS = 300.0
"""``import stargraph`` must take less than this."""

IMPORT_LANGGRAPH_RATIO = 4.0
"""Each of :data:`CORE_IMPORTS` must be at least this many times lighter (CPU time, same run)
than ``import langgraph.graph``."""

CORE_IMPORTS = ("stargraph", "stargraph.llm", "stargraph.skills.react")
"""The imports weighed against LangGraph's."""


class StateMismatch(Exception):
    """Two engines (or an engine and the expectation) disagree on a workload's final state."""


@dataclass(frozen=True)
class WorkloadResult:
    """Timings of one workload: µs per node execution, one figure per round, per engine."""

    workload: Workload
    size: int
    invocations: int
    per_node_us: Mapping[str, Sequence[float]]

    @property
    def nodes(self) -> int:
        """Node executions per invocation."""
        return self.workload.nodes(self.size)

    def median(self, engine: str) -> float:
        """Median µs per node execution of ``engine`` over the rounds."""
        return statistics.median(self.per_node_us[engine])

    @property
    def langgraph_ratio(self) -> float:
        """How many times slower LangGraph is than stargraph (higher is better)."""
        return self.median("langgraph") / self.median("stargraph")

    @property
    def plain_ratio(self) -> float:
        """How many times slower stargraph is than plain Python (lower is better)."""
        return self.median("stargraph") / self.median("plain")


def _describe(final: Snapshot) -> str:
    counter, items = final
    shown = ", ".join(repr(i) for i in items[:4]) + (", ..." if len(items) > 4 else "")
    return f"counter={counter}, {len(items)} items [{shown}]"


def check_agreement(workload: Workload, size: int) -> dict[str, Snapshot]:
    """Run ``workload`` once per engine; raise :class:`StateMismatch` unless all reach the
    expected final state. Returns each engine's final ``(counter, items)``."""
    expected = workload.expected(size)
    finals = {engine: snapshot(workload.builders[engine](size)()) for engine in ENGINES}
    wrong = {engine: final for engine, final in finals.items() if final != expected}
    if wrong:
        lines = [f"workload {workload.name!r} (size {size}): engines disagree on the final state"]
        lines.append(f"  expected  : {_describe(expected)}")
        lines.extend(f"  {engine:<10}: {_describe(final)}" for engine, final in finals.items())
        raise StateMismatch("\n".join(lines))
    return finals


def time_workload(
    workload: Workload, *, rounds: int, invocations: int, size: int | None = None
) -> WorkloadResult:
    """Check the engines agree, then time ``rounds`` rounds of ``invocations`` each."""
    size = workload.size if size is None else size
    check_agreement(workload, size)
    runners = {engine: workload.builders[engine](size) for engine in ENGINES}
    for runner in runners.values():
        runner()  # warm up: first-call caches, lazy imports
    nodes = workload.nodes(size) * invocations
    per_node: dict[str, list[float]] = {engine: [] for engine in ENGINES}
    for _ in range(rounds):
        for engine, runner in runners.items():
            gc.collect()
            start = time.perf_counter_ns()
            for _ in range(invocations):
                runner()
            elapsed = time.perf_counter_ns() - start
            per_node[engine].append(elapsed / 1000 / nodes)
    return WorkloadResult(workload, size, invocations, per_node)


def import_time_ms(module: str = "stargraph", repeats: int = 5) -> float:
    """Median wall time of ``import module`` in a fresh interpreter (startup excluded)."""
    code = (
        "import time; t = time.perf_counter(); "
        f"import {module}; print((time.perf_counter() - t) * 1000)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPROFILEIMPORTTIME"}
    samples = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
        )
        samples.append(float(out.stdout.strip()))
    return statistics.median(samples)


# ---------------------------------------------------------------------- report


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def render(results: Sequence[WorkloadResult], rounds: int) -> tuple[str, list[str]]:
    """The table, and a list of missed targets (empty when all are met)."""
    header = (
        f"{'workload':<10} {'description':<34} {'engine':<10} {'nodes/run':>9} "
        f"{'runs':>5} {'µs/node':>9}  ratio"
    )
    lines = [
        f"median µs per node execution over {rounds} round(s); Python "
        f"{platform.python_version()}, stargraph {_version('stargraph')}, "
        f"langgraph {_version('langgraph')}, {os.cpu_count()} CPU(s)",
        "",
        header,
        "-" * len(header) + "-" * 30,
    ]
    misses: list[str] = []
    for r in results:
        name, desc = r.workload.name, r.workload.description
        lg_ok = r.langgraph_ratio >= LANGGRAPH_TARGET
        plain_ok = r.plain_ratio <= PLAIN_TARGET
        ratios = {
            "stargraph": "",
            "langgraph": f"LangGraph/stargraph {r.langgraph_ratio:6.1f}x  "
            f"{_verdict(lg_ok)} (>= {LANGGRAPH_TARGET:.0f}x)",
            "plain": f"stargraph/plain     {r.plain_ratio:6.1f}x  "
            f"{_verdict(plain_ok)} (<= {PLAIN_TARGET:.0f}x)",
        }
        for i, engine in enumerate(ENGINES):
            row = (
                f"{name if i == 0 else '':<10} {desc if i == 0 else '':<34} {engine:<10} "
                f"{r.nodes:>9} {r.invocations:>5} {r.median(engine):>9.2f}  {ratios[engine]}"
            )
            lines.append(row.rstrip())
        if not lg_ok:
            misses.append(
                f"{name}: stargraph only {r.langgraph_ratio:.1f}x faster than LangGraph "
                f"(target {LANGGRAPH_TARGET:.0f}x)"
            )
        if not plain_ok:
            misses.append(
                f"{name}: stargraph {r.plain_ratio:.1f}x slower than plain Python "
                f"(target {PLAIN_TARGET:.0f}x)"
            )
    return "\n".join(lines), misses


# ---------------------------------------------------------------------- CLI


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="stargraph vs LangGraph vs plain Python, µs per node execution.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="3 rounds at 1/10 of the invocations (a fast sanity run)",
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="run only this workload or report section (durable, bytes, long); repeatable, or "
        "comma-separated",
    )
    parser.add_argument("--rounds", type=int, help="timed rounds per engine (default 7)")
    parser.add_argument(
        "--strict", action="store_true", help="exit with status 1 when a target is missed"
    )
    parser.add_argument(
        "--budgets",
        action="store_true",
        help="run only the CPU-time budget gate (benchmarks.budgets); exit 1 when over",
    )
    parser.add_argument(
        "--no-import-time", action="store_true", help="skip the `import stargraph` measurement"
    )
    return parser.parse_args(argv)


def all_sections() -> dict[str, Section]:
    """Report sections printed after the core table, by ``--only`` name, in report order."""
    from benchmarks.bench_agents import SECTIONS as AGENTS
    from benchmarks.bench_concurrency import SECTIONS as CONCURRENCY
    from benchmarks.bench_llmcall import SECTIONS as LLMCALL
    from benchmarks.bench_long_runs import SECTIONS as LONG
    from benchmarks.bench_mcp import SECTIONS as MCP
    from benchmarks.bench_modes import SECTIONS as MODES
    from benchmarks.durable import SECTIONS

    return {**SECTIONS, **LONG, **CONCURRENCY, **MODES, **AGENTS, **LLMCALL, **MCP}


def _select(
    workloads: list[Workload], sections: Mapping[str, Section], only: Sequence[str] | None
) -> tuple[list[Workload], list[str]]:
    """The workloads and section names ``--only`` picks (all of them without ``--only``)."""
    if not only:
        return workloads, list(sections)
    wanted = [n.strip() for item in only for n in item.split(",") if n.strip()]
    known = {w.name for w in workloads} | set(sections)
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; choose from {sorted(known)}")
    return [w for w in workloads if w.name in wanted], [s for s in sections if s in wanted]


def _imports(repeats: int) -> list[str]:
    """Print the import lines (median of fresh interpreters); return the targets missed."""
    from benchmarks.bench_llmcall import import_times_ms

    times = import_times_ms((*CORE_IMPORTS, "langgraph.graph"), repeats)
    theirs = times["langgraph.graph"][1]
    misses = []
    for module, (wall, cpu) in times.items():
        line = f"import {module:<22} {wall:7.1f} ms wall {cpu:7.1f} ms CPU"
        if module == "stargraph":
            line += f"  {_verdict(wall < IMPORT_BUDGET_MS)} (< {IMPORT_BUDGET_MS:.0f} ms)"
            if wall >= IMPORT_BUDGET_MS:
                misses.append(f"import stargraph takes {wall:.0f} ms")
        if module in CORE_IMPORTS:
            ok = theirs >= IMPORT_LANGGRAPH_RATIO * cpu
            line += f"  langgraph.graph/this {theirs / cpu:4.1f}x {_verdict(ok)}"
            if not ok:
                misses.append(
                    f"import {module} is {theirs / cpu:.1f}x lighter than langgraph.graph "
                    f"(target {IMPORT_LANGGRAPH_RATIO:.0f}x)"
                )
        print(line)
    return misses


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks and print the table; return the process exit status."""
    args = _parse(argv)
    if args.budgets:
        from benchmarks.budgets import main as budget_gate

        return budget_gate(["--quick"] if args.quick else [])
    rounds = args.rounds or (3 if args.quick else 7)
    sections = all_sections()
    workloads, chosen = _select(all_workloads(), sections, args.only)
    results = []
    for workload in workloads:
        invocations = max(1, workload.invocations // 10) if args.quick else workload.invocations
        print(f"running {workload.name} ({workload.description}) ...", file=sys.stderr)
        try:
            results.append(time_workload(workload, rounds=rounds, invocations=invocations))
        except StateMismatch as exc:
            print(f"ABORT: {exc}", file=sys.stderr)
            return 2
    misses: list[str] = []
    if workloads:
        table, misses = render(results, rounds)
        print(table)
    for name in chosen:
        print(f"running section {name} ...", file=sys.stderr)
        try:
            text, missed = sections[name](quick=args.quick, rounds=rounds)
        except StateMismatch as exc:
            print(f"ABORT: {exc}", file=sys.stderr)
            return 2
        print()
        print(text)
        misses += missed
    if not args.no_import_time:
        print()
        misses += _imports(repeats=3 if args.quick else 5)
    print()
    if misses:
        print("targets missed:")
        print("\n".join(f"  - {m}" for m in misses))
    else:
        print("all targets met")
    return 1 if misses and args.strict else 0
