"""Load on ``stargraph serve``: concurrent streamed runs, with LangGraph's own client.

Run: ``.venv/bin/python benchmarks/bench_serve.py [runs] [sqlite|postgres|both]`` (default
100, both). PostgreSQL is a throwaway server on 127.0.0.1 (``tests/postgres/pgcluster.py``).

The server (``create_app`` under uvicorn on a loopback port, 2 worker threads) serves a
graph of five steps. ``runs`` clients at once (asyncio, ``langgraph_sdk.get_client``) each
create a thread and stream a run in ``updates`` and ``values`` modes to its end. Checked,
for every run: the events it got are numbered 0, 1, 2, ... with none missing or repeated
once the events of other modes are counted (its full stored stream is read back), the run
ended ``success`` after one claim (no run run twice), and its stargraph run has every step
once; and the server holds exactly ``runs`` runs (none lost). Reported: wall time,
throughput (runs/s) and the latency of one run, from the request to the end of its stream
(p50, p99; it includes the wait for a worker, so it grows with ``runs``).

The whole load is bounded by a deadline (a hang fails instead of waiting forever).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import uvicorn
from langgraph_sdk import get_client
from pydantic import BaseModel

from stargraph import END, START, Graph, reducers
from stargraph.serve import create_app

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 600.0


class Count(BaseModel):
    n: int = 0
    seen: Annotated[list[int], reducers.append] = []


def tick(state: Count) -> dict[str, Any]:
    return {"n": state.n + 1, "seen": [state.n + 1]}


def again(state: Count) -> str:
    return "tick" if state.n < 5 else END


GRAPH = (
    Graph("count", state=Count)
    .with_node("tick", tick)
    .with_edge(START, "tick")
    .with_conditional_edges("tick", again, {"tick": "tick", END: END})
)


def serve(db: str, workers: int) -> tuple[uvicorn.Server, threading.Thread, str]:
    app = create_app([GRAPH], db, workers=workers)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise SystemExit("the server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, f"http://127.0.0.1:{port}"


async def load(url: str, runs: int) -> dict[str, Any]:
    latencies: list[float] = []
    problems: list[str] = []
    async with get_client(url=url, timeout=DEADLINE_S) as client:

        async def one(i: int) -> None:
            start = time.perf_counter()
            tid = (await client.threads.create())["thread_id"]
            got = [
                p
                async for p in client.runs.stream(
                    tid, "count", input={}, stream_mode=["updates", "values"]
                )
            ]
            latencies.append(time.perf_counter() - start)
            run_id = got[0].data["run_id"]
            every = [int(p.id) async for p in client.runs.join_stream(tid, run_id)]
            live = [int(p.id) for p in got]
            if every != list(range(len(every))):
                problems.append(f"run {i}: stored events {every} are not 0..n")
            if not set(live) <= set(every) or live != sorted(set(live)):
                problems.append(f"run {i}: streamed ids {live} lost or repeated one")
            if [p.event for p in got].count("updates") != 5:
                problems.append(f"run {i}: {[p.event for p in got]} is not five updates")
            run = await client.runs.get(tid, run_id)
            if run["status"] != "success" or run["stargraph"]["attempts"] != 1:
                problems.append(f"run {i}: {run['status']} after {run['stargraph']['attempts']}")
            state = await client.threads.get_state(tid)
            if state["values"]["seen"] != [1, 2, 3, 4, 5]:
                problems.append(f"run {i}: steps {state['values']['seen']}")

        began = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(runs))), DEADLINE_S)
        wall = time.perf_counter() - began
        threads = await client.threads.search(limit=runs + 10)
        if len(threads) != runs:
            problems.append(f"{len(threads)} threads for {runs} runs")
    latencies.sort()
    return {
        "wall": wall,
        "throughput": runs / wall,
        "p50": statistics.median(latencies),
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "problems": problems,
    }


def bench(db: str, runs: int, label: str) -> bool:
    server, thread, url = serve(db, workers=2)
    try:
        r = asyncio.run(load(url, runs))
    finally:
        server.should_exit = True
        thread.join(60)
    ok = not r["problems"]
    print(
        f"{label:<10} {runs} runs: {r['wall']:.2f} s, {r['throughput']:.1f} runs/s, "
        f"latency p50 {r['p50'] * 1000:.0f} ms, p99 {r['p99'] * 1000:.0f} ms - "
        + ("no event or run lost or doubled" if ok else "; ".join(r["problems"][:5]))
    )
    return ok


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    which = sys.argv[2] if len(sys.argv) > 2 else "both"
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        if which in ("sqlite", "both"):
            ok &= bench(str(Path(tmp) / "runs.db"), runs, "sqlite")
        if which in ("postgres", "both"):
            sys.path.insert(0, str(ROOT / "tests" / "postgres"))
            import pgcluster

            with pgcluster.running_cluster() as cluster:
                ok &= bench(cluster.dsn, runs, "postgres")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
