"""What announcing each stored model token costs ``stargraph serve`` on PostgreSQL: storing
a token event (``Tables.append_events``) alone against storing it and then announcing it on
the store's channel (``Tables.announce``, the ``NOTIFY`` that wakes a console on the run),
interleaved on one server.

    python benchmarks/bench_serve_tokens.py [--dsn postgresql://...] [--tokens 2000]

Without ``--dsn`` it starts a throwaway server with fsync on (``tests/postgres/pgcluster.py``).
A connection ``LISTEN``s on the channel throughout, as an open console page does. One thread
stores the tokens of one run (a worker streams one run at a time): the figures are the
median time per token (µs) and the tokens a second that rate allows, with and without the
notice. A model streams some tens of tokens a second, so the ceiling is what matters.

The notice is sent by a thread of the tables' own (coalescing those asked for while one is
in flight), so the worker pays only for handing it over; sent inline, each notice was a
commit of its own and cost as much as storing the token (measured while choosing, fsync on:
4.3 ms a token stored, 6.2 ms stored and announced).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "postgres"))
sys.path.insert(0, str(ROOT))

from benchmarks.bench_postgres import postgres_server  # noqa: E402  (after the path)


def main() -> int:
    import psycopg

    from stargraph.serve._tables import open_tables

    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--tokens", type=int, default=2000)
    opts = parser.parse_args()
    with postgres_server(opts.dsn) as dsn:
        schema = f"bench_{uuid.uuid4().hex[:8]}"
        tables = open_tables(dsn, schema=schema)
        channel = f"stargraph_{schema}"[:63]
        chunk = json.dumps(
            [
                {"type": "AIMessageChunk", "content": " word", "id": "r:1:write:0"},
                {"langgraph_node": "write", "langgraph_step": 1, "run_id": "r"},
            ]
        )
        times: dict[str, list[int]] = {"announced": [], "stored only": []}
        seq = {"announced": 0, "stored only": 0}
        try:
            with psycopg.connect(dsn, autocommit=True) as listener:
                listener.execute(f'LISTEN "{channel}"')
                for k in range(opts.tokens):
                    order = ("announced", "stored only") if k % 2 else ("stored only", "announced")
                    for key in order:
                        t0 = time.perf_counter_ns()
                        tables.append_events(key, seq[key], [("messages", chunk)])
                        if key == "announced":
                            tables.announce("r")
                        times[key].append(time.perf_counter_ns() - t0)
                        seq[key] += 1
                    if k % 500 == 0:
                        for _ in listener.notifies(timeout=0):
                            pass
        finally:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            tables.close()
    for key, found in times.items():
        median = statistics.median(found) / 1000
        print(f"{key:12s} median {median:7.1f} us a token, ceiling {1e6 / median:6.0f} tokens/s")
    extra = statistics.median(times["announced"]) - statistics.median(times["stored only"])
    print(f"the notice adds {extra / 1000:.1f} us a token")
    return 0


if __name__ == "__main__":
    sys.exit(main())
