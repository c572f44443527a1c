"""What ``PostgresStore``'s change notices cost a commit: the store as is against the same
store with its notice switched off, interleaved on one server.

    python benchmarks/bench_pg_notify.py [--dsn postgresql://...] [--steps 2000] [--rounds 5]

Without ``--dsn`` it starts a throwaway server with fsync on (``tests/postgres/pgcluster.py``).
A connection ``LISTEN``s on the channel throughout, as an open console page does.

* ``commit_step`` latency: one thread, commits alternating between the two stores (µs);
* throughput: 4 threads committing steps of their own runs, commits/s per round (median),
  rounds alternating between the two stores.

Each notice is a transaction of its own right after the write's: inside the write's
transaction, PostgreSQL's notify lock is held through the WAL flush and concurrent commits
queue behind it (measured while choosing: 203 commits/s inside, 427 after, 508 without).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "postgres"))
sys.path.insert(0, str(ROOT))

from benchmarks.bench_postgres import postgres_server  # noqa: E402  (after the path)


def main() -> int:
    import psycopg

    from stargraph.checkpoint import PostgresStore, StepRecord, WriteRecord
    from stargraph.checkpoint.conformance import make_run

    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args()
    threads, per_thread = 4, 300
    with postgres_server(opts.dsn) as dsn:
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        stores = {
            "notice": PostgresStore(dsn, schema=schema, pool_size=threads),
            "none": PostgresStore(dsn, schema=schema, pool_size=threads),
        }
        stores["none"]._notify = lambda conn, run_id: None  # type: ignore[method-assign]
        with psycopg.connect(dsn, autocommit=True) as listener:
            listener.execute(f'LISTEN "{stores["notice"].channel}"')
            latency: dict[str, list[int]] = {k: [] for k in stores}
            for key, store in stores.items():
                store.create_run(make_run(key), StepRecord(step=0, snapshot={"n": 0}))
            for k in range(1, opts.steps + 1):
                step = StepRecord(step=k, writes=(WriteRecord(node="n", writes={"n": k}),))
                for key in ("notice", "none") if k % 2 else ("none", "notice"):
                    t0 = time.perf_counter_ns()
                    stores[key].commit_step(key, step)
                    latency[key].append(time.perf_counter_ns() - t0)
                if k % 500 == 0:
                    for _ in listener.notifies(timeout=0):
                        pass
            rates: dict[str, list[float]] = {k: [] for k in stores}
            for n in range(opts.rounds):
                for key, store in stores.items():
                    ids = [f"{key}-{n}-{i}" for i in range(threads)]
                    for rid in ids:
                        store.create_run(make_run(rid), StepRecord(step=0, snapshot={"n": 0}))

                    def work(rid: str, store: PostgresStore = store) -> None:
                        for k in range(1, per_thread + 1):
                            writes = (WriteRecord(node="n", writes={"n": k}),)
                            store.commit_step(rid, StepRecord(step=k, writes=writes))

                    workers = [threading.Thread(target=work, args=(rid,)) for rid in ids]
                    t0 = time.perf_counter()
                    for w in workers:
                        w.start()
                    for w in workers:
                        w.join()
                    rates[key].append(threads * per_thread / (time.perf_counter() - t0))
                    for _ in listener.notifies(timeout=0):
                        pass
        for store in stores.values():
            store.drop_schema()
            store.close()
    for key in stores:
        print(
            f"{key:6s} commit_step median {statistics.median(latency[key]) / 1000:7.1f} us, "
            f"4 threads median {statistics.median(rates[key]):6.0f} commits/s "
            f"{[round(r) for r in rates[key]]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
