"""``stargraph check`` on 100 recorded runs against re-running them live (issue 48).

Run (from the repository root, as a module: the graph's node references name
``benchmarks.checkgraph``)::

    PYTHONPATH=src .venv/bin/python -m benchmarks.bench_check [--runs 100] [--latency-ms 100]

The graph (:mod:`benchmarks.checkgraph`) has a skill subgraph, a ``Send`` fan-out of three
and six model calls per run in four rounds, all to the scripted OpenAI-compatible server
(:class:`~stargraph.testing.ScriptedOpenAIServer`) over real HTTP; the server itself holds
every reply for ``--latency-ms`` before answering, as a hosted model's round trip would
(100 ms is the fast end of one; a real model is slower, so the ratios are conservative).

1. ``--runs`` runs are recorded live, spread over ``--processes`` worker processes, each
   exported as a cassette with the graph's region hashes (untimed).
2. Timed, each with the model requests it made counted on the server:

   (a) ``stargraph check CASSETTES --graph benchmarks.checkgraph:current -j P``, the
       command a CI job runs, in a subprocess (process start-up and imports included):
       every region is served from the record, no model request;
   (a1) the same with ``-j 1``, to show what the parallel processes give;
   (b) the same runs re-run live in a pool of ``P`` processes (the baseline ``check``
       replaces: what re-checking them costs without a record);
   (c) ``stargraph check`` after a one-node edit (``summarize``'s prompt): that node alone
       runs, live, one model request per cassette; everything else is served.

Printed: seconds and requests for each, and the ratios live / check. The run fails (exit 2)
when (a) is not at least :data:`TARGET` times faster than (b), or when a check made a model
request it should not have.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stargraph.checkpoint import MemoryStore
from stargraph.replay import export_cassette
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer

ROOT = Path(__file__).resolve().parent.parent
GRAPH = "benchmarks.checkgraph:current"
TARGET = 3.0
"""(a) must be at least this many times faster than (b)."""

_WORKER: dict[str, Any] = {}


def delayed_echo(latency: float) -> Any:
    """The server's script: each prompt echoed, after ``latency`` seconds."""

    def answer(request: RecordedRequest) -> Reply:
        body = request.body or {}
        return Reply.text("re: " + str(body["messages"][-1]["content"])).delayed(latency)

    return answer


def _init_live(base_url: str) -> None:
    from benchmarks.checkgraph import compile_version

    _WORKER["app"] = compile_version("base", base_url)


def _live(topic: str, run_id: str, out: str) -> str:
    """One run, live, into a fresh memory store; exported as a cassette at ``out``."""
    store = MemoryStore()
    app = _WORKER["app"].with_store(store)
    app.invoke({"topic": topic}, run_id=run_id)
    return str(export_cassette(store, run_id, out, graph=app))


def live_runs(base_url: str, runs: int, folder: Path, processes: int) -> float:
    """Seconds to make ``runs`` runs live in a pool of ``processes`` (pool start included)."""
    context = multiprocessing.get_context("spawn")
    ids = [f"run{i:03d}" for i in range(runs)]
    started = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(
        processes, mp_context=context, initializer=_init_live, initargs=(base_url,)
    ) as pool:
        list(
            pool.map(
                _live,
                [f"topic{i:03d}" for i in range(runs)],
                ids,
                [str(folder / f"{run_id}.json") for run_id in ids],
            )
        )
    return time.perf_counter() - started


def check(base_url: str, folder: Path, variant: str, processes: int) -> tuple[float, int]:
    """Seconds of ``stargraph check folder --graph ... -j processes``, and its exit code."""
    env = {
        **os.environ,
        "CHECKGRAPH_VARIANT": variant,
        "OPENAI_BASE_URL": base_url,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])
        ),
    }
    command = [
        sys.executable,
        "-c",
        "import sys; from stargraph.cli import main; sys.exit(main())",
        "check",
        str(folder),
        "--graph",
        GRAPH,
        "-j",
        str(processes),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, check=False, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    summary = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
    print(f"    {' '.join(command[3:5])} ... -j {processes}: exit {done.returncode}, {summary[0]}")
    return seconds, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_check")
    parser.add_argument("--runs", type=int, default=100, help="recorded runs (cassettes)")
    parser.add_argument("--latency-ms", type=float, default=100.0, help="server delay per reply")
    parser.add_argument("--processes", "-j", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    runs, processes, latency = args.runs, args.processes, args.latency_ms / 1000
    failures: list[str] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-check-") as tmp,
        ScriptedOpenAIServer(delayed_echo(latency)) as server,
    ):
        cassettes, scratch = Path(tmp) / "cassettes", Path(tmp) / "live"
        cassettes.mkdir()
        scratch.mkdir()
        print(f"recording {runs} runs live ({processes} processes) ...", file=sys.stderr)
        live_runs(server.base_url, runs, cassettes, processes)
        per_run = len(server.chat_requests) // runs
        rows: list[tuple[str, float, int]] = []

        def timed(
            label: str, expect_exit: int, expect_requests: int, variant: str, j: int
        ) -> float:
            before = len(server.chat_requests)
            seconds, code = check(server.base_url, cassettes, variant, j)
            requests = len(server.chat_requests) - before
            rows.append((label, seconds, requests))
            if code != expect_exit or requests != expect_requests:
                failures.append(
                    f"{label}: exit {code} (expected {expect_exit}), {requests} model requests "
                    f"(expected {expect_requests})"
                )
            return seconds

        print("timing ...", file=sys.stderr)
        check_s = timed(f"(a) check, -j {processes}", 0, 0, "base", processes)
        timed("(a1) check, -j 1", 0, 0, "base", 1)
        before = len(server.chat_requests)
        live_s = live_runs(server.base_url, runs, scratch, processes)
        rows.append(
            (f"(b) live re-run, {processes} processes", live_s, len(server.chat_requests) - before)
        )
        edit_s = timed(
            f"(c) check after a one-node edit, -j {processes}", 1, runs, "prompt", processes
        )
    print(
        f"stargraph check: {runs} cassettes of a graph with a skill subgraph and a Send fan-out "
        f"of 3, {per_run} model requests per run, {latency * 1000:g} ms server latency per "
        f"request, {processes} processes"
    )
    for label, seconds, requests in rows:
        print(
            f"  {label:42} {seconds:8.2f} s  {1000 * seconds / runs:7.1f} ms/run  "
            f"{requests:5d} requests"
        )
    ratio = live_s / check_s
    print(f"  live / check:                  {ratio:6.1f}x  (target >= {TARGET:g}x)")
    print(f"  live / check after one edit:   {live_s / edit_s:6.1f}x")
    print(f"  check -j 1 / check -j {processes}:       {rows[1][1] / check_s:6.2f}x")
    if ratio < TARGET:
        failures.append(f"live / check is {ratio:.1f}x, under the target of {TARGET:g}x")
    for failure in failures:
        print(f"FAIL: {failure}")
    return 2 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
